"""The server's HTTP layer: the ASGI app, one thin router per audience, the error map and the edge.

Routers parse and authenticate a request (signed by a device, or an operator's bearer token), call one
domain function and map its errors to HTTP in one place; they hold no SQL and no protocol logic.
"""
