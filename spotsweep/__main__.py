from spotsweep.cli import main

raise SystemExit(main())
