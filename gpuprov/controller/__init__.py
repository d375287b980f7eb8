"""The controller's edges: the pyinfra inventory, facts and operations, the deploy, the live
read-back of every host, and kubectl."""
