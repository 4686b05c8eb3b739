"""One module per CLI command: `add_arguments(parser)` and `execute(args, app) -> Outcome`. A command
parses, calls the session (api/), a backend (backends/) or a flow, and renders; it never imports
another command, the executor or transport/."""
