"""gpuprov.deploys"""
