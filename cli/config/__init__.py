"""The YAML configuration: found, checked, and frozen into settings."""
