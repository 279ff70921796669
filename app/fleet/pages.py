"""HTML pages of the fleet (placeholder until the views land)."""

from fastapi import APIRouter

router = APIRouter(include_in_schema=False)
