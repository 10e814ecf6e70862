"""Kubernetes, the outbound side: a node's devices as ``resource.k8s.io/v1`` ResourceSlices
(``slices``: pure building; ``publisher``: kept equal to the inventory through the API)
and the devices a ResourceClaim was allocated (``claims``). The kubelet plugin
(exosuit/kubelet/) uses both; doc/kubernetes.md.
"""
