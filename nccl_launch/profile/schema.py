"""`schema`: the profile format as JSON Schema, for editors (Taplo / Even Better TOML)."""

from __future__ import annotations

from typing import Any

from nccl_launch.nccl import catalog, rules
from nccl_launch.profile.model import Profile


def _nccl_properties() -> dict[str, Any]:
    properties = {}
    for name, var in sorted(catalog.catalog().items()):
        entry = rules.catalog_rule(var).schema() | {"description": var.summary}
        if var.deprecated:
            entry["deprecated"] = True
        properties[name.removeprefix(catalog.PREFIX)] = entry
    return properties


def profile_schema() -> dict[str, Any]:
    """The pydantic model's schema, with `[nccl]` typed per variable from the catalogs."""
    schema = Profile.model_json_schema(by_alias=True)
    properties = schema["properties"]
    properties["nccl"] = {
        "type": "object",
        "description": "NCCL variables without the NCCL_ prefix, checked with NCCL's grammar.",
        "properties": _nccl_properties(),
        "additionalProperties": False,
    }
    properties["env"] = {
        "type": "object",
        "description": "Other variables the server needs; NCCL ones belong in [nccl].",
        "propertyNames": {"pattern": "^(?!NCCL_)[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"type": ["string", "integer"]},
    }
    properties["env_files"] |= {
        "description": "dotenv files (0600) read at start, for secrets; relative to this file.",
        "items": {"type": "string", "minLength": 1},
    }
    properties["secret_files"] |= {
        "description": "NAME = a file holding just the value (a Secret volume's), read at start.",
        "propertyNames": properties["env"]["propertyNames"],
        "additionalProperties": {"type": "string", "minLength": 1},
    }
    properties["schema"]["const"] = 1
    return {"$schema": "https://json-schema.org/draft/2020-12/schema"} | schema
