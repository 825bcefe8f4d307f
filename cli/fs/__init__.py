"""File-system building blocks below the tools, each module one thing: paths (resolution),
reach (a checked path reached beneath its root, never through a symlink), reading, writing,
attributes (what a file keeps besides content), removal, trashcan, delete, renaming, trees and
walk (whole trees, by fds), deadline, fingerprint, globs (the policy lists' syntax), wording
(failures in words), stored (reading our own files back)."""
