import sys

from asyncmem.cli import main

sys.exit(main())
