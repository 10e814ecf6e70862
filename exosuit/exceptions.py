"""Domain exceptions: they carry a message and a stable code, never HTTP.

    ExosuitError
    ├── Invalid                  bad input the domain layer detected
    │   ├── InventoryInvalid     a snapshot the schema passes but that cannot be applied
    │   ├── DeviceLabelsInvalid  a label key, value or count the rules refuse
    │   ├── LimitExceeded        a request beyond a configured limit (doc/limits.md)
    │   └── PartitionUnsupported a partition layout the device's capabilities cannot make
    ├── NotFound
    │   ├── DeviceProfileNotFound
    │   ├── AcceleratorRequestNotFound
    │   ├── DeviceNotFound
    │   ├── DeployableNotFound
    │   ├── AttributeNotFound
    │   ├── HostNotFound
    │   ├── AttachHandleNotFound
    │   ├── JobNotFound
    │   ├── ImageNotFound        absent, or not visible to the caller
    │   ├── ProgramNotFound
    │   ├── DiscoveryNotFound
    │   ├── DriverNotFound       a driver no host asked reports (install, update)
    │   ├── ClaimNotFound
    │   ├── AuditEventNotFound
    │   └── ServerNotAttached    detach: no live claim of that server (consumer)
    ├── Conflict
    │   ├── DeviceProfileExists
    │   ├── DeviceProfileInUse
    │   ├── DeviceProfileInUseMeanwhile
    │   ├── ARQBadState
    │   ├── InstanceAlreadyBound
    │   ├── BindFailed
    │   ├── JobNotFailed
    │   ├── ImageNotActive       no data yet
    │   ├── ImageHasData         uploaded already
    │   ├── ImageInUse           a program uses it
    │   ├── ImageAmbiguous       several images have the function id asked for
    │   ├── ProgramInUse         an attach handle of the device is held
    │   ├── ProgramBusy          another program runs on the deployable
    │   ├── ProgramUnsupported   the driver cannot load this (format)
    │   ├── ProgramUnavailable   the device is disabled, missing or lost
    │   ├── ProgramFailed        the program ended failed (the reason)
    │   ├── ProgramEnded         a report about a program that already ended
    │   ├── DeviceInUse          inactive asked while an attach handle is held
    │   ├── DeviceNotLost        deleting a device its host still reports
    │   ├── DriverInUse          uninstall asked while a device of the driver is held
    │   ├── ActivationSuperseded an agent's outcome of an activation changed since
    │   ├── PartitionInUse       a partition layout that removes a slice in use
    │   ├── PartitionSuperseded  an agent's outcome of a layout changed since
    │   ├── ClaimUnsatisfiable   no devices for a claim (nothing is held)
    │   ├── ClaimReleased        renewing a released claim
    │   ├── ARQClaimed           an ARQ a claim holds, changed through the ARQ API
    │   ├── ServerAttached       attach: the server holds another profile's claim
    │   └── ServerManagedByNova  attach/detach: Nova's server keeps its accelerators
    ├── ImageInvalid             the data does not match its size, hash or signature
    │   └── ImageSignatureInvalid  a required signature is missing, unknown or wrong
    ├── ImageTooLarge            above [images] max_size
    ├── ServiceTokenRequired
    ├── ARQUnresolved
    ├── DatabaseUnavailable
    ├── PlacementError           Placement refused a request
    │   ├── PlacementUnavailable unreachable, timed out, 5xx, 401/403, no endpoint
    │   ├── PlacementConflict    409: generation, in use, duplicate name or uuid
    │   └── PlacementNotFound    404
    ├── NovaError                Nova refused or did not answer a request
    │   └── NovaUnavailable      unreachable, timed out, 5xx, 401/403, no endpoint
    └── GlanceError              Glance refused a request (an image's source)
        └── GlanceUnavailable    unreachable, timed out, 5xx, 401/403, no endpoint

The API maps each family to an HTTP status in one place (exosuit.api.wsgi).
"""

from __future__ import annotations

from typing import Any


class ExosuitError(Exception):
    msg_fmt = "An unknown error occurred."
    code = "exosuit.error"

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        # kwargs: the values msg_fmt names (numbers, strings, lists: whatever %-formats).
        self.kwargs = kwargs
        if message is None:
            message = self.msg_fmt % kwargs if kwargs else self.msg_fmt
        self.message = message
        super().__init__(message)


class Invalid(ExosuitError):
    msg_fmt = "Invalid input: %(reason)s"
    code = "exosuit.invalid"


class InventoryInvalid(Invalid):
    msg_fmt = "The inventory snapshot of host %(hostname)s is refused: %(reason)s"
    code = "exosuit.inventory.invalid"


class DeviceLabelsInvalid(Invalid):
    """Labels asked for devices that the rules refuse (exosuit/schemas/labels.py): the
    message says which and why."""

    msg_fmt = "Device labels refused: %(reason)s."
    code = "exosuit.device.labels_invalid"


class LimitExceeded(Invalid):
    """A request asks for more than a limit allows; the message names the option."""

    msg_fmt = "%(what)s; at most %(limit)d (%(option)s)."
    code = "exosuit.limit.exceeded"


class PartitionUnsupported(Invalid):
    """A partition layout the device's reported services cannot make (the message names
    what it can make)."""

    msg_fmt = "Device %(uuid)s cannot make the partition layout asked: %(reason)s."
    code = "exosuit.partition.unsupported"


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
        "Device profile %(name)s is used by %(count)d accelerator request(s); delete them first."
    )
    code = "exosuit.device_profile.in_use"


class DeviceProfileInUseMeanwhile(Conflict):
    msg_fmt = (
        "Device profile %(name)s is used by an accelerator request made while it was being "
        "deleted; delete that first."
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
        code = self.kwargs.get("placement_code")
        return str(code) if code is not None else None


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


class GlanceError(ExosuitError):
    """Raised by exosuit.glance.client, where keystoneauth's errors are translated."""

    msg_fmt = "Glance answered %(status)s to %(method)s %(url)s: %(detail)s"
    code = "exosuit.glance.error"


class GlanceUnavailable(GlanceError):
    msg_fmt = "Glance is unavailable (%(method)s %(url)s): %(detail)s"
    code = "exosuit.glance.unavailable"


# -- microversion 2.5 (fleet views): NotFound and Conflict members ---------------------------


class AttachHandleNotFound(NotFound):
    msg_fmt = "Attach handle %(uuid)s could not be found."
    code = "exosuit.attach_handle.not_found"


class JobNotFound(NotFound):
    msg_fmt = "Job %(ident)s could not be found."
    code = "exosuit.job.not_found"


class AuditEventNotFound(NotFound):
    msg_fmt = "Audit event %(ident)s could not be found."
    code = "exosuit.audit_event.not_found"


class JobNotFailed(Conflict):
    msg_fmt = "Job %(ident)s is %(state)s: only a failed job can be retried."
    code = "exosuit.job.not_failed"


# Images and programming (doc/programming.md)


class ImageNotFound(NotFound):
    msg_fmt = "Image %(uuid)s could not be found."
    code = "exosuit.image.not_found"


class ProgramNotFound(NotFound):
    msg_fmt = "Program %(uuid)s could not be found."
    code = "exosuit.program.not_found"


class ImageNotActive(Conflict):
    msg_fmt = "Image %(uuid)s has no data yet (status %(status)s): upload it first."
    code = "exosuit.image.not_active"


class ImageHasData(Conflict):
    msg_fmt = "Image %(uuid)s already has its data; an image's data never changes."
    code = "exosuit.image.has_data"


class ImageInUse(Conflict):
    msg_fmt = "Image %(uuid)s is used by program %(program)s."
    code = "exosuit.image.in_use"


class ImageAmbiguous(Conflict):
    msg_fmt = "Several images have function id %(function_id)s: %(uuids)s."
    code = "exosuit.image.ambiguous"


class ProgramInUse(Conflict):
    msg_fmt = (
        "Deployable %(uuid)s cannot be programmed while its device is in use (%(holders)s); "
        "drain it first."
    )
    code = "exosuit.program.in_use"


class ProgramBusy(Conflict):
    msg_fmt = "Deployable %(uuid)s is being programmed with another image (program %(program)s)."
    code = "exosuit.program.busy"


class ProgramUnsupported(Conflict):
    msg_fmt = "Deployable %(uuid)s cannot load this image: %(reason)s"
    code = "exosuit.program.unsupported"


class ProgramUnavailable(Conflict):
    msg_fmt = "Deployable %(uuid)s cannot be programmed now: %(reason)s"
    code = "exosuit.program.unavailable"


class ProgramFailed(Conflict):
    msg_fmt = "Programming deployable %(uuid)s failed: %(reason)s"
    code = "exosuit.program.failed"


class ProgramEnded(Conflict):
    msg_fmt = "Program %(uuid)s already ended (%(state)s)."
    code = "exosuit.program.ended"


class DiscoveryNotFound(NotFound):
    msg_fmt = "Discovery %(uuid)s could not be found."
    code = "exosuit.discovery.not_found"


class DriverNotFound(NotFound):
    """Installing or updating a driver that no agent of the hosts asked reports (the
    message names the drivers they do report)."""

    msg_fmt = (
        "Driver %(name)s could not be found: no agent of %(hosts)s reports it. "
        "The drivers reported there: %(known)s."
    )
    code = "exosuit.driver.not_found"


class DeviceInUse(Conflict):
    """Marking a device inactive while attach handles of it are held (the message names
    the holders)."""

    code = "exosuit.device.in_use"


class DeviceNotLost(Conflict):
    """Deleting a device its host's agent still reports (present, or missing within its
    removal grace): the report keeps or deletes it (doc/devices.md)."""

    msg_fmt = "Device %(uuid)s is %(presence)s: %(reason)s"
    code = "exosuit.device.not_lost"


class DriverInUse(Conflict):
    """Uninstalling a driver while attach handles of its devices are held (the message
    names the holders)."""

    code = "exosuit.driver.in_use"


class ActivationSuperseded(Conflict):
    msg_fmt = (
        "Device %(uuid)s is no longer asked to %(action)s at generation %(generation)s "
        "(its activation is %(activation)s at generation %(current)s): the outcome is "
        "dropped."
    )
    code = "exosuit.activation.superseded"


class PartitionInUse(Conflict):
    msg_fmt = (
        "The partition layout of device %(uuid)s would remove a slice in use: %(reason)s "
        "(held: %(held)s). Release them first, or keep them in the layout."
    )
    code = "exosuit.partition.in_use"


class PartitionSuperseded(Conflict):
    msg_fmt = (
        "Device %(uuid)s has another partition layout than the one of generation "
        "%(generation)s (its partition state is %(state)s at generation %(current)s): the "
        "outcome is dropped."
    )
    code = "exosuit.partition.superseded"


class ImageInvalid(ExosuitError):
    msg_fmt = "Image %(uuid)s was refused: %(reason)s"
    code = "exosuit.image.invalid"


class ImageSignatureInvalid(ImageInvalid):
    msg_fmt = "Image %(uuid)s was refused: its signature %(reason)s"
    code = "exosuit.image.signature"


class ImageTooLarge(ExosuitError):
    msg_fmt = "Image %(uuid)s is larger than [images] max_size (%(max_size)d bytes)."
    code = "exosuit.image.too_large"


# Standalone claims (microversion 2.8, doc/standalone.md)


class ClaimNotFound(NotFound):
    msg_fmt = "Claim %(uuid)s could not be found."
    code = "exosuit.claim.not_found"


class ClaimUnsatisfiable(Conflict):
    msg_fmt = "The claim cannot be satisfied (nothing is held): %(reason)s"
    code = "exosuit.claim.unsatisfiable"


class ClaimReleased(Conflict):
    msg_fmt = "Claim %(uuid)s was released at %(released_at)s; claim again instead."
    code = "exosuit.claim.released"


class ARQClaimed(Conflict):
    msg_fmt = (
        "Accelerator request %(uuid)s is held by claim %(claim)s: release the claim "
        "(DELETE /v2/claims/%(claim)s)."
    )
    code = "exosuit.arq.claimed"


# Attaching devices to a server, detaching them (microversion 2.10, doc/standalone.md)


class ServerNotAttached(NotFound):
    msg_fmt = "Server %(server)s has nothing attached%(what)s: %(why)s"
    code = "exosuit.server.not_attached"


class ServerAttached(Conflict):
    msg_fmt = (
        "Server %(server)s already holds claim %(claim)s (%(held)s): detach it first "
        "(POST /v2/servers/%(server)s/detach); a server holds one attachment."
    )
    code = "exosuit.server.attached"


class ServerManagedByNova(Conflict):
    msg_fmt = "Server %(server)s is Nova's%(holds)s. %(refusal)s %(instead)s"
    code = "exosuit.server.nova_managed"
