"""``exosuit-kubelet-plugin``: the DRA kubelet plugin of one node (doc/kubernetes.md).

Options: the node, where Exosuit is (the ``exosuit`` command line's connection
options: an endpoint with no auth, or Keystone), where the Kubernetes API is (a
kubeconfig, else the pod's in-cluster account), the kubelet's socket directories and
the checkpoint's. Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from exosuit.cli.app import add_connection_options
from exosuit.cli.client import CLIError, connect
from exosuit.cmd import setup_logging
from exosuit.stopping import stop_while_starting

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exosuit-kubelet-plugin",
        description="Exosuit's DRA driver (exosuit.dev) on one Kubernetes node: registers "
        "with the kubelet, prepares ResourceClaims as Exosuit claims (CDI devices) and "
        "publishes the node's devices as ResourceSlices.",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="The Kubernetes node this runs on ($NODE_NAME; required).",
    )
    parser.add_argument(
        "--hostname",
        help="The same machine's host name in Exosuit (default: the node name).",
    )
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or None,
        metavar="PATH",
        help="kubeconfig of the Kubernetes API ($KUBECONFIG); default: in-cluster "
        "(the pod's service account).",
    )
    parser.add_argument(
        "--registry-dir",
        default=DEFAULT_REGISTRY_DIR,
        metavar="DIR",
        help=f"The kubelet's plugin registry (default {DEFAULT_REGISTRY_DIR}).",
    )
    parser.add_argument(
        "--plugins-dir",
        default=DEFAULT_PLUGINS_DIR,
        metavar="DIR",
        help=f"The kubelet's plugins directory (default {DEFAULT_PLUGINS_DIR}); the DRA "
        "socket is <DIR>/exosuit.dev/dra.sock.",
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="Where checkpoint.json is kept (default <plugins dir>/exosuit.dev).",
    )
    parser.add_argument(
        "--publish-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="How often the ResourceSlices are compared with the inventory (default 30).",
    )
    parser.add_argument(
        "--prepare-timeout",
        type=float,
        default=40.0,
        metavar="SECONDS",
        help="How long a prepare waits for its claim's CDI specs (default 40; the "
        "kubelet gives a call 45).",
    )
    parser.add_argument("--debug", action="store_true", help="Log debug messages.")
    add_connection_options(parser)
    return parser


def _kubernetes(kubeconfig: str | None) -> ApiClient:
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def main(argv: list[str] | None = None) -> int:
    with stop_while_starting():  # until the plugin's own handlers take over
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.node_name:
        parser.error("--node-name (or $NODE_NAME) is required")
    setup_logging(args.debug)
    try:
        from exosuit.kubelet.checkpoint import CheckpointError
        from exosuit.kubelet.exosuit_api import ExosuitApi
        from exosuit.kubelet.main import Settings, run
    except ImportError as error:  # the [kubernetes] extra is not installed
        print(
            f"exosuit-kubelet-plugin: {error} (pip install 'exosuit[kubernetes]')", file=sys.stderr
        )
        return 1
    try:
        api = connect(args)
        kube = _kubernetes(args.kubeconfig)
    except (CLIError, OSError) as error:
        print(f"exosuit-kubelet-plugin: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # kubernetes.config's ConfigException and the like
        print(f"exosuit-kubelet-plugin: Kubernetes configuration: {error}", file=sys.stderr)
        return 1
    plugins_dir = Path(args.plugins_dir)
    settings = Settings(
        node=args.node_name,
        hostname=args.hostname or args.node_name,
        registry_dir=Path(args.registry_dir),
        plugins_dir=plugins_dir,
        checkpoint_dir=Path(args.checkpoint_dir or plugins_dir / "exosuit.dev"),
        publish_interval=args.publish_interval,
        prepare_timeout=args.prepare_timeout,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        return run(settings, ExosuitApi(api.session, api.url), kube, stop)
    except CheckpointError as error:  # refused rather than guessed at: see its module
        print(f"exosuit-kubelet-plugin: checkpoint {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
