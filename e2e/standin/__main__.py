"""TEST SUPPORT ONLY: ``python -m e2e.standin`` runs the vLLM stand-in (see e2e/standin/__init__.py)."""

from e2e.standin.server import main

raise SystemExit(main())
