from mlra.console.cli.cli import main

raise SystemExit(main())
