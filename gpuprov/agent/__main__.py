"""``python3 -m gpuprov.agent`` runs the agent's command line, as ``python3 agent.pyz`` does."""

import sys

from gpuprov.agent.main import main

sys.exit(main())
