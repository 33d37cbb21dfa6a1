"""The baseline: the same server stack (uvicorn + Starlette, same workers) doing no work."""

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


async def accept(request: Request) -> Response:
    await request.body()
    return JSONResponse({"accepted": 1}, 202)


app = Starlette(routes=[Route("/api/event", accept, methods=["POST"])])
