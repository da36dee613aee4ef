"""The web console (contract section 18): server-rendered pages for company users and
operators, signed in with an API credential, calling the same services as the API."""
