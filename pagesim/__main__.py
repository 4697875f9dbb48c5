from pagesim.cli import main

raise SystemExit(main())
