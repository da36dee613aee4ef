"""HTTP plumbing shared by every router: dependencies, problem responses, JSON responses.
Domains never import it; their routers do."""
