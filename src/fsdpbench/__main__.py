from fsdpbench.cli import main

raise SystemExit(main())
