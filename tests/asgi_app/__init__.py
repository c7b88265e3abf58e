"""A small ASGI site for tests that serve django-sbert through a real ASGI server (uvicorn):
async views over the async searches, and the REST API, on the test database."""
