from rl_core.cli.main import main

raise SystemExit(main())
