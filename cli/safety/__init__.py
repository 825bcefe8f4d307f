"""What may happen: the policy, the sensitive lists, the shell-line reader and the sandboxes."""
