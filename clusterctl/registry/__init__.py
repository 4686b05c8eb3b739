"""Private registries: whose credentials a pull uses, and what a failed pull means.

- `credentials`: Docker's own lookup (credHelpers, credsStore, auths) over a config.json and
  a way to run `docker-credential-<name> get`, so the node's login is used as the node's
  `docker pull` would use it, or the controller's when the inventory says so.
- `pull_errors`: a registry's or engine's refusal -> its cause and a fix that works.
"""
