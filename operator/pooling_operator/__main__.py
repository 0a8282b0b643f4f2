from pooling_operator.cli import main

raise SystemExit(main())
