"""[images]: where images come from, where their data is kept, and what signs them
(doc/programming.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from oslo_config import cfg

from exosuit.conf._values import text_map, texts

__all__ = ["GROUP", "ImagesSettings", "OPTIONS", "options"]

GROUP = "images"

OPTIONS: list[cfg.Opt] = [
    cfg.ListOpt(
        "sources",
        default=["exosuit"],
        help="Where program and bind requests look an image up, in this order: exosuit "
        "(the catalogue, /v2/images) and/or glance.",
    ),
    cfg.StrOpt(
        "data_dir",
        default="$state_path/images",
        help="Directory of the catalogue's image data (one file per image).",
    ),
    cfg.StrOpt(
        "cache_dir",
        default="$state_path/image-cache",
        help="Directory where the API keeps the data of Glance images it served to agents, "
        "by hash.",
    ),
    cfg.IntOpt(
        "cache_size",
        default=8 * 1024**3,
        min=0,
        help="Bytes the API's cache of Glance image data may hold (least recently used first out).",
    ),
    cfg.IntOpt(
        "max_size",
        default=4 * 1024**3,
        min=1,
        help="Largest image (bytes) the catalogue accepts: a larger upload gets 413.",
    ),
    cfg.DictOpt(
        "trusted_keys",
        default={},
        help="Public keys that sign images: key_id:/path/to/key.pem, … (PEM, RSA or EC). An "
        "image's signature must verify with the key it names. A Glance image names its "
        "key by img_signature_certificate_uuid.",
    ),
    cfg.BoolOpt(
        "require_signature",
        default=False,
        help="Refuse images without a signature by a trusted key (catalogue uploads, "
        "Glance images, programs).",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class ImagesSettings:
    """The ``[images]`` options."""

    sources: tuple[str, ...]
    data_dir: str
    cache_dir: str
    cache_size: int
    max_size: int
    trusted_keys: Mapping[str, str]
    require_signature: bool

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ImagesSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.images
        return cls(
            sources=texts(group.sources),
            data_dir=str(group.data_dir),
            cache_dir=str(group.cache_dir),
            cache_size=int(group.cache_size),
            max_size=int(group.max_size),
            trusted_keys=text_map(group.trusted_keys),
            require_signature=bool(group.require_signature),
        )
