"""The core: what the extender decides with, as pure Python with no I/O.

Nothing here imports kubernetes, fastapi, starlette, httpx, aiohttp or uvicorn (an import-linter
contract). Everything above it (the scheduling plugins, the gang feature, the ESLs, the HTTP
routes and the features' Kubernetes sides) is built on these modules:

  objects      the fields of Kubernetes objects the extender reads, as msgspec structs
  quantity     Kubernetes quantities, parsed exactly as the API server does
  podrequests  what a pod requests, exactly as kube-scheduler computes it
  ...
"""
