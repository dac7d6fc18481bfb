import sys

from concilium.cli import main

sys.exit(main())
