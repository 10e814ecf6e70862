"""Discovery bodies (microversion 2.7): POST /v2/discoveries."""

from exosuit.api.schemas.drivers import HOSTNAMES

POST_DISCOVERY_V2_7 = {
    "type": "object",
    "properties": {"hostnames": HOSTNAMES},
    "additionalProperties": False,
}
