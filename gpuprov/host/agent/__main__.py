"""``python3 -m gpuprov.host.agent`` runs the agent's command line, as ``python3 agent.pyz`` does."""

import sys

from gpuprov.host.agent.main import main

sys.exit(main())
