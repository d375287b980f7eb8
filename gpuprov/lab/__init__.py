"""gpuprov.lab"""
