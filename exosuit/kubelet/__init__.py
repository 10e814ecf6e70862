"""The DRA kubelet plugin ``exosuit-kubelet-plugin`` (doc/kubernetes.md): one per node,
registered with the kubelet, serving the DRA node service over gRPC on Unix sockets
(``server``), preparing ResourceClaims as Exosuit claims (``driver``) with a checkpoint
that survives restarts (``checkpoint``), and publishing the node's ResourceSlices
(through exosuit/kubernetes/). It talks to Exosuit over HTTP only (``exosuit_api``).
"""
