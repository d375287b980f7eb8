"""gpuprov.operations"""
