"""The console's pages, a module an area: each route parses, checks the session's
scopes, calls the same service function as the API's route and renders a template."""
