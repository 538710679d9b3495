from nkitui.cli import main

raise SystemExit(main())
