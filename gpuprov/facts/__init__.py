"""gpuprov.facts"""
