"""Domain exceptions: they carry a message and a stable code, never HTTP.

    ExosuitError
    ├── Invalid                  bad input the domain layer detected
    ├── NotFound
    │   ├── DeviceProfileNotFound
    │   ├── AcceleratorRequestNotFound
    │   ├── DeviceNotFound
    │   ├── DeployableNotFound
    │   ├── AttributeNotFound
    │   └── HostNotFound
    ├── Conflict
    │   ├── DeviceProfileExists
    │   ├── DeviceProfileInUse
    │   ├── ARQBadState
    │   ├── InstanceAlreadyBound
    │   └── BindFailed
    ├── ServiceTokenRequired
    ├── ARQUnresolved
    ├── DatabaseUnavailable
    ├── PlacementError           Placement refused a request
    │   ├── PlacementUnavailable unreachable, timed out, 5xx, 401/403, no endpoint
    │   ├── PlacementConflict    409: generation, in use, duplicate name or uuid
    │   └── PlacementNotFound    404
    └── NovaError                Nova refused or did not answer a request
        └── NovaUnavailable      unreachable, timed out, 5xx, 401/403, no endpoint

The API maps each family to an HTTP status in one place (exosuit.api.wsgi).
"""

from __future__ import annotations


class ExosuitError(Exception):
    msg_fmt = "An unknown error occurred."
    code = "exosuit.error"

    def __init__(self, message: str | None = None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            message = self.msg_fmt % kwargs if kwargs else self.msg_fmt
        self.message = message
        super().__init__(message)


class Invalid(ExosuitError):
    msg_fmt = "Invalid input: %(reason)s"
    code = "exosuit.invalid"


class NotFound(ExosuitError):
    msg_fmt = "Not found."
    code = "exosuit.not_found"


class DeviceProfileNotFound(NotFound):
    msg_fmt = "Device profile %(ident)s could not be found."
    code = "exosuit.device_profile.not_found"


class AcceleratorRequestNotFound(NotFound):
    msg_fmt = "Accelerator request %(uuid)s could not be found."
    code = "exosuit.arq.not_found"


class DeviceNotFound(NotFound):
    msg_fmt = "Device %(uuid)s could not be found."
    code = "exosuit.device.not_found"


class DeployableNotFound(NotFound):
    msg_fmt = "Deployable %(uuid)s could not be found."
    code = "exosuit.deployable.not_found"


class AttributeNotFound(NotFound):
    msg_fmt = "Attribute %(uuid)s could not be found."
    code = "exosuit.attribute.not_found"


class HostNotFound(NotFound):
    msg_fmt = "Host %(hostname)s could not be found."
    code = "exosuit.host.not_found"


class Conflict(ExosuitError):
    msg_fmt = "Conflict."
    code = "exosuit.conflict"


class DeviceProfileExists(Conflict):
    msg_fmt = "A device profile with %(field)s %(value)s already exists."
    code = "exosuit.device_profile.duplicate"


class DeviceProfileInUse(Conflict):
    msg_fmt = (
        "Device profile %(name)s is used by %(count)d accelerator request(s); "
        "delete them first."
    )
    code = "exosuit.device_profile.in_use"


class ARQBadState(Conflict):
    msg_fmt = (
        "Accelerator request %(uuid)s is in state %(state)s; "
        "this operation needs one of %(expected)s."
    )
    code = "exosuit.arq.bad_state"


class InstanceAlreadyBound(Conflict):
    msg_fmt = "Instance %(instance)s already has bound accelerator requests."
    code = "exosuit.arq.instance_already_bound"


class BindFailed(Conflict):
    msg_fmt = "Binding accelerator request %(uuid)s failed: %(reason)s"
    code = "exosuit.arq.bind_failed"


class ServiceTokenRequired(ExosuitError):
    msg_fmt = "%(action)s requires a service token."
    code = "exosuit.service_token_required"


class ARQUnresolved(ExosuitError):
    msg_fmt = "Accelerator requests of instance %(instance)s are not resolved yet: %(uuids)s"
    code = "exosuit.arq.unresolved"


class DatabaseUnavailable(ExosuitError):
    msg_fmt = "The database is unavailable: %(reason)s"
    code = "exosuit.database.unavailable"


class PlacementError(ExosuitError):
    """Raised by exosuit.placement.client, where keystoneauth's errors are translated."""

    msg_fmt = "Placement answered %(status)s to %(method)s %(url)s: %(detail)s"
    code = "exosuit.placement.error"

    @property
    def placement_code(self) -> str | None:
        """Placement's own error code (``placement.concurrent_update`` …), if any."""
        return self.kwargs.get("placement_code")


class PlacementUnavailable(PlacementError):
    msg_fmt = "Placement is unavailable (%(method)s %(url)s): %(detail)s"
    code = "exosuit.placement.unavailable"


class PlacementConflict(PlacementError):
    code = "exosuit.placement.conflict"


class PlacementNotFound(PlacementError):
    code = "exosuit.placement.not_found"


class NovaError(ExosuitError):
    """Raised by exosuit.nova.client, where keystoneauth's errors are translated."""

    msg_fmt = "Nova answered %(status)s to %(method)s %(url)s: %(detail)s"
    code = "exosuit.nova.error"


class NovaUnavailable(NovaError):
    msg_fmt = "Nova is unavailable (%(method)s %(url)s): %(detail)s"
    code = "exosuit.nova.unavailable"
