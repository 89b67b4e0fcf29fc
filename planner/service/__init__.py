"""Running the app as a service: the deployment checks the production entrypoint makes."""
