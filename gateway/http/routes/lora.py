"""LoRA adapters at run time (admin; vLLM's routes and bodies; docs/lora.md):

- ``POST /v1/load_lora_adapter`` ``{"lora_name": ..., "lora_path": ...}``: every engine loads the
  PEFT directory (a path on the engines' host) and requests select it by ``model: lora_name``;
  400 for a name already served (an adapter's or the model's) or an adapter the engines refuse
  (not a PEFT directory, a rank above ``--max-lora-rank``, another base model's shapes: the
  engine's message names the module).
- ``POST /v1/unload_lora_adapter`` ``{"lora_name": ...}``: new requests naming it get a 404; those
  running finish through it, and the engine frees it after them. 404 for a name not loaded.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.engine.errors import EngineDeadError, EngineError
from agentgate.gateway.api_types.openai import LoadLoraAdapterRequest, UnloadLoraAdapterRequest, decode_body
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.errors import BadRequestError, NotFoundError


async def load_lora_adapter(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), LoadLoraAdapterRequest)
    name = body.lora_name.strip()
    if not name or not body.lora_path.strip():
        raise BadRequestError("lora_name and lora_path must not be empty", param="lora_name")
    if name in gw.model.served_names:
        raise BadRequestError(f"The LoRA adapter `{name}` is already loaded (or names the model)", param="lora_name")
    try:
        await gw.pool.load_lora(name, body.lora_path)
    except EngineDeadError:
        raise
    except EngineError as exc:
        await gw.pool.unload_lora(name)  # an engine that took it before another refused
        raise BadRequestError(str(exc), param="lora_path") from None
    gw.model.adapters[name] = body.lora_path
    return Response(f"Success: LoRA adapter '{name}' added successfully.", media_type="text/plain")


async def unload_lora_adapter(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), UnloadLoraAdapterRequest)
    name = body.lora_name
    if name not in gw.model.adapters:
        raise NotFoundError(f"The LoRA adapter `{name}` is not loaded", param="lora_name")
    del gw.model.adapters[name]  # new requests naming it are refused from now on
    await gw.pool.unload_lora(name)
    return Response(f"Success: LoRA adapter '{name}' removed successfully.", media_type="text/plain")


routes = [
    Route("/v1/load_lora_adapter", load_lora_adapter, methods=["POST"]),
    Route("/v1/unload_lora_adapter", unload_lora_adapter, methods=["POST"]),
]
