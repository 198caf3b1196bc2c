from mlra.console.cli import main

raise SystemExit(main())
