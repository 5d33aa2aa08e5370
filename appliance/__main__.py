"""Entry point for `python -m appliance`."""

from appliance.cli import main

raise SystemExit(main())
