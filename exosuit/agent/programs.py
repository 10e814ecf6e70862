"""The program reconciler: load onto this host's devices the images its desired state names.

doc/programming.md ("States", "Agent protocol") is the contract. The desired state
comes with every inventory response and from ``GET
/agent/v1/hosts/{hostname}/desired_state`` (a conditional GET on its generation, every
``[agent] desired_state_interval``). For each program it names, the agent:

1. finds the deployable (by control-path id and name) and its driver, which must be
   ``Programmable`` and list the image's format in ``program_formats``;
2. asks the driver what is loaded: the same image (or function) already there is
   ``done`` at once, nothing fetched or loaded;
3. ``fetching``: downloads the image (``Range`` resumes a partial file) into the
   content-addressed cache (exosuit/images/store.py), which verifies size and SHA-256;
   the previous image the desired state names is fetched too, and both are pinned;
4. ``programming``: the driver loads it;
5. ``verifying``: re-discovers the device and compares what the driver reads back with
   the image's function and interface ids;
6. ``done`` with what is loaded, or ``failed`` with the reason, after loading the
   previous image again where the device was touched (``restored`` true, false, or
   null when there was nothing to restore).

Then the agent reports its inventory at once (the loaded function's traits). The final
report is kept in the agent cache and sent again, with backoff, until the API
acknowledges it (the base of every reconciler: agent/reconciler.py), so a restart neither
loads an image twice nor loses the outcome. An unreachable API costs nothing: the step
is tried again at the next poll (a download resumes where it stopped). Nothing here
waits: the agent loop (agent/service.py) does every wait, through its clock.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from exosuit import schemas
from exosuit.agent.cache import AgentCache, AgentState, FinishedProgram
from exosuit.agent.clock import Clock
from exosuit.agent.http import transport_errors
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reconciler import Reconciler
from exosuit.agent.reporter import Response, Session
from exosuit.drivers.base import (
    PROGRAM_FORMATS,
    Deployable,
    Device,
    Driver,
    ImageFile,
    LoadedImage,
    ProgramError,
    Programmable,
    trait_suffix,
)
from exosuit.images import verify
from exosuit.images.store import ContentStore

LOG = logging.getLogger(__name__)

__all__ = [
    "CHUNK_SIZE",
    "REMEMBERED_IMAGES",
    "DataResponse",
    "ProgramReconciler",
    "ProgramSession",
]

CHUNK_SIZE = 1024 * 1024
# How many images' ids the agent keeps (to check a rollback to one of them).
REMEMBERED_IMAGES = 64


class DataResponse(Response, Protocol):
    """A response whose body may be streamed (requests' ``stream=True``)."""

    def iter_content(self, chunk_size: int) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class ProgramSession(Session, Protocol):
    """The part of a keystoneauth1 session the reconciler uses: the reporter's ``put``,
    and ``get`` (exosuit.agent.transport.WsgiSession is another)."""

    def get(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        raise_exc: bool,
        timeout: float,
        authenticated: bool,
        stream: bool,
    ) -> DataResponse: ...


class _Unreachable(Exception):
    """The API did not answer (or answered 5xx, 401, 403 …): try again at the next poll."""


class _Gone(Exception):
    """The API says the program no longer concerns this agent (404, or 409: it ended)."""


class _Failure(Exception):
    """The program fails: ``reason``; ``touched``: the device may have changed."""

    def __init__(self, reason: str, *, touched: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.touched = touched


@dataclasses.dataclass(frozen=True)
class _Target:
    driver: Driver
    device: Device
    deployable: Deployable


class ProgramReconciler(Reconciler[Mapping[str, Any], FinishedProgram]):
    """Runs the programs of this host's desired state, one at a time, each to its end
    (the base: agent/reconciler.py), and polls the desired state every ``interval``.

    ``step(state)`` is called by the agent loop; it never waits, and returns True when
    a device was programmed (or restored): the loop then reports the inventory at once.
    ``drivers``: a ``DriverSet`` (the agent's: overrides that rebuild a driver reach the
    programs too), or the drivers themselves.
    """

    section = "programs"
    path = "programs"
    noun = "a program"
    subject = "program {key}"
    session: ProgramSession

    def __init__(
        self,
        hostname: str,
        drivers: Sequence[Driver] | DriverSet,
        session: ProgramSession,
        endpoint: str,
        store: ContentStore,
        cache: AgentCache,
        *,
        clock: Clock,
        interval: float = 5.0,
        timeout: float = 30.0,
        **options: Any,
    ) -> None:
        plugins = drivers if isinstance(drivers, DriverSet) else DriverSet.fixed(drivers)
        super().__init__(
            hostname, plugins, session, endpoint, cache, timeout=timeout, clock=clock, **options
        )
        self.store = store
        self.interval = interval
        self.url = f"{self.endpoint}/agent/v1/hosts/{hostname}/desired_state"
        self.next_poll = float("-inf")  # the first step polls
        self._poll_problem: str | None = None  # logged once per change

    @property
    def drivers(self) -> list[Driver]:
        """The drivers running now."""
        return self.plugins.drivers

    def wake_at(self) -> float | None:
        return self.next_poll

    # -- the step the agent loop calls -------------------------------------------------

    def step(self, state: AgentState) -> bool:
        """Poll the desired state when due, then run each program it names that this
        agent has not finished. True when a device changed."""
        if self.clock.now() >= self.next_poll:
            self.next_poll = self.clock.now() + self.interval
            if not self.poll(state):
                return False  # the API is unreachable: nothing can be fetched or reported
        return self.reconcile(state)

    def reconcile(self, state: AgentState) -> bool:
        """Run (or finish reporting) every program of ``state.desired_state``."""
        return super().step(state)

    def parse(self, item: Any) -> tuple[str, Mapping[str, Any]]:
        if not (
            isinstance(item, Mapping)
            and isinstance(item.get("uuid"), str)
            and isinstance(item.get("image"), Mapping)
        ):
            raise ValueError("")
        return item["uuid"], item

    def records(self, state: AgentState) -> dict[str, FinishedProgram]:
        return state.programs

    def answered(
        self, state: AgentState, key: str, record: FinishedProgram, response: Response
    ) -> None:
        status = response.status_code
        if status == 404:
            self.log.info("program %s: the API does not know it on this host (404)", key)
        elif status == 409:
            self.log.info("program %s: it already ended (%s)", key, response.text[:200])
        else:
            super().answered(state, key, record, response)

    def poll(self, state: AgentState) -> bool:
        """``GET …/desired_state`` (304 while its generation is the one held); False when
        the API is unreachable."""
        headers = {}
        generation = state.desired_state.get("generation")
        if generation is not None:
            headers["If-None-Match"] = f'"{generation}"'
        try:
            response = self.session.get(
                self.url,
                headers=headers,
                raise_exc=False,
                timeout=self.timeout,
                authenticated=self.session.auth is not None,
                stream=False,
            )
        except transport_errors() as error:
            self._poll_status(f"desired state unreachable: {error}")
            return False
        status = response.status_code
        if status == 304:
            self._poll_status(None)
            return True
        if status == 200:
            self._poll_status(None)
            body = response.json()
            desired = body.get("desired_state", body) if isinstance(body, dict) else None
            if isinstance(desired, dict) and "generation" in desired:
                if desired != state.desired_state:
                    state.desired_state = desired
                    self.save(state)
            return True
        if status == 404:
            # An API without the endpoint: the inventory responses still carry the state.
            self._poll_status("the API has no desired-state endpoint (404)", level=logging.INFO)
            return True
        self._poll_status(f"desired state: {status} {response.text[:200]}")
        return status < 500 and status not in (401, 403, 408, 429)

    # -- one program ---------------------------------------------------------------------

    def run(self, state: AgentState, uuid: str, program: Mapping[str, Any]) -> bool:
        """Take one program to its end (or to the next poll, when the API is away)."""
        image: Mapping[str, Any] = program["image"]
        previous: Mapping[str, Any] | None = program.get("previous_image")
        pins: list[str] = []
        before: LoadedImage | None = None  # what the device held, for checking a rollback
        touched = False
        LOG.info("program %s: image %s onto %s", uuid, image.get("uuid"), program.get("deployable"))
        try:
            target = self._find(program)
            driver = _programmable(target, image)
            before = loaded = self._loaded(target)
            if _matches(loaded, image):
                self._remember(state, image)
                return self._finish(state, uuid, "done", "already loaded", loaded=loaded)
            self._progress(uuid, "fetching")
            path = self._fetch(image, pins)
            self._fetch_previous(previous, pins)  # pinned in the cache, for a rollback
            self._progress(uuid, "programming")
            touched = True
            try:
                driver.program(target.device, target.deployable, _image_file(path, image))
            except ProgramError as error:
                untouched = " (device untouched)" if error.untouched else ""
                raise _Failure(
                    f"loading failed: {error}{untouched}", touched=not error.untouched
                ) from error
            except Exception as error:  # a driver's failure is data: it is reported
                raise _Failure(f"loading failed: {error}", touched=True) from error
            self._progress(uuid, "verifying")
            target = self._find(program)
            loaded = self._loaded(target, strict=True)
            mismatch = _mismatch(loaded, image)
            if mismatch is not None:
                raise _Failure(f"verification failed: {mismatch}", touched=True)
            self._remember(state, image)
            return self._finish(state, uuid, "done", None, loaded=loaded)
        except _Unreachable as error:
            LOG.warning("program %s: %s; trying again at the next poll", uuid, error)
            return touched
        except _Gone as error:
            LOG.warning("program %s: %s; leaving it", uuid, error)
            self.remember(state, uuid, {"report": {"state": "abandoned"}, "acknowledged": True})
            return touched
        except _Failure as failure:
            restored = None
            if failure.touched:
                restored = self._restore(state, program, previous, before)
            return self._finish(
                state, uuid, "failed", failure.reason, restored=restored, changed=failure.touched
            )
        finally:
            for sha256 in pins:
                self.store.unpin(sha256)

    def _find(self, program: Mapping[str, Any]) -> _Target:
        """The driver, device and deployable a program names, as discovered now."""
        name = program.get("deployable")
        cpid = program.get("controlpath_id")
        identity = schemas.device_identity(cpid) if cpid else None
        for driver in self.drivers:
            try:
                devices = driver.discover()
            except Exception as error:  # one driver's failure does not hide the others
                LOG.warning("driver %s failed: %s", driver.name, error)
                continue
            for device in devices:
                if identity is not None:
                    found = device.to_snapshot()["controlpath_id"]
                    if schemas.device_identity(found) != identity:
                        continue
                for deployable in device.deployables:
                    if deployable.name == name:
                        return _Target(driver, device, deployable)
        raise _Failure(f"deployable {name} is not on host {self.hostname}", touched=False)

    def _loaded(self, target: _Target, *, strict: bool = False) -> LoadedImage | None:
        """What the driver reads back; a driver that cannot tell is None (or, after a
        load, a failure)."""
        driver = _programmable(target, None)
        try:
            return driver.loaded(target.device, target.deployable)
        except Exception as error:
            if strict:
                raise _Failure(
                    f"reading back the loaded image failed: {error}", touched=True
                ) from error
            LOG.warning("driver %s could not tell what is loaded: %s", target.driver.name, error)
            return None

    # -- fetching ------------------------------------------------------------------------

    def _fetch(self, image: Mapping[str, Any], pins: list[str]) -> str:
        """The image's verified file in the cache, downloaded (or resumed) when needed."""
        sha256: str = image["sha256"]
        self.store.pin(sha256)
        pins.append(sha256)
        found = self.store.path(sha256)
        if found is not None:
            return found
        size: int | None = image.get("size")
        with self.store.lock(sha256):
            for attempt in (1, 2):
                partial, had = self.store.partial(sha256)
                if size is not None and had > size:
                    self.store.discard(sha256)
                    had = 0
                if size is None or had < size:
                    self._download(self._url(image), partial, had, sha256)
                try:
                    return self.store.commit(sha256, size)
                except verify.Mismatch as error:
                    if attempt == 1 and had > 0:
                        continue  # a resumed file went wrong: once more, from nothing
                    raise _Failure(
                        f"image {image.get('uuid')} was refused: {error} (device untouched)",
                        touched=False,
                    ) from error
                except FileNotFoundError:
                    raise _Unreachable("the image's data did not arrive") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _fetch_previous(self, previous: Mapping[str, Any] | None, pins: list[str]) -> str | None:
        """The previous image, for a rollback; None (with a warning) when it cannot be
        had, which leaves a failure unrestorable but the program possible."""
        if not previous or not previous.get("sha256"):
            return None
        try:
            return self._fetch(previous, pins)
        except _Failure as failure:
            LOG.warning(
                "previous image %s unavailable for a rollback: %s", previous.get("uuid"), failure
            )
            return None

    def _download(self, url: str, partial: str, had: int, sha256: str) -> None:
        """Append the data from byte ``had`` (a 206), or write it whole (a 200)."""
        headers = {"Range": f"bytes={had}-"} if had else {}
        try:
            response = self.session.get(
                url,
                headers=headers,
                raise_exc=False,
                timeout=self.timeout,
                authenticated=self.session.auth is not None,
                stream=True,
            )
        except transport_errors() as error:
            raise _Unreachable(f"image data unreachable: {error}") from None
        try:
            status = response.status_code
            if status == 416:
                self.store.discard(sha256)  # the partial file is not a prefix: start over
                raise _Unreachable("the API refused the range asked for; starting over")
            if status == 404:
                raise _Failure("the image's data is not found (404)", touched=False)
            if status not in (200, 206):
                if status >= 500 or status in (401, 403, 408, 429):
                    raise _Unreachable(f"image data: {status}")
                raise _Failure(f"image data refused: {status} {response.text[:200]}", touched=False)
            # 200: the API sent it whole (it ignored the range): write it from the start.
            with open(partial, "ab" if status == 206 else "wb") as file:
                for chunk in response.iter_content(CHUNK_SIZE):
                    file.write(chunk)
        except OSError as error:  # the connection died mid-way: what arrived is kept
            raise _Unreachable(f"image download interrupted: {error}") from None
        finally:
            response.close()

    def _url(self, image: Mapping[str, Any]) -> str:
        href = image.get("href") or f"/agent/v1/images/{image['uuid']}/data"
        return href if "://" in href else f"{self.endpoint}{href}"

    # -- rollback ------------------------------------------------------------------------

    def _restore(
        self,
        state: AgentState,
        program: Mapping[str, Any],
        previous: Mapping[str, Any] | None,
        before: LoadedImage | None,
    ) -> bool | None:
        """Load the previous image again (from the cache, where ``_fetch_previous`` put
        it): True when it is back, False when it could not be, None when there was none.

        "Back" is checked against the previous image's ids: those the desired state
        gives, else those it had when this agent loaded it, else what the device held
        before the program (``before``); when none is known, the load's success is all."""
        if not previous:
            return None
        if not previous.get("sha256"):
            LOG.error("program %s: the previous image's hash is unknown", program["uuid"])
            return False
        previous_path = self.store.path(previous["sha256"])
        if previous_path is None:
            return False
        LOG.warning("program %s failed: loading image %s again", program["uuid"], previous["uuid"])
        image = {"format": program["image"].get("format"), **previous}
        try:
            target = self._find(program)
            driver = _programmable(target, image)
            driver.program(target.device, target.deployable, _image_file(previous_path, image))
            target = self._find(program)
            loaded = driver.loaded(target.device, target.deployable)
        except Exception as error:
            LOG.error(
                "program %s: the previous image could not be loaded: %s", program["uuid"], error
            )
            return False
        expected = dict(image)
        known = state.image_ids.get(previous["sha256"])
        if not expected.get("function_id") and known is not None:
            expected.update({k: v for k, v in known.items() if v and not expected.get(k)})
        elif not expected.get("function_id") and before is not None:
            expected["function_id"] = before.function_id
            expected["interface_id"] = expected.get("interface_id") or before.interface_id
        if loaded is not None and (loaded.image_uuid or expected.get("function_id")):
            mismatch = _mismatch(loaded, expected)
            if mismatch is not None:
                LOG.error("program %s: after the rollback %s", program["uuid"], mismatch)
                return False
        elif expected.get("function_id"):
            LOG.error("program %s: after the rollback the device reports nothing", program["uuid"])
            return False
        return True

    def _remember(self, state: AgentState, image: Mapping[str, Any]) -> None:
        """Keep the ids of an image known to be loaded (the last ``REMEMBERED_IMAGES``)."""
        if image.get("function_id") or image.get("interface_id"):
            state.image_ids.pop(image["sha256"], None)  # the most recent last
            state.image_ids[image["sha256"]] = {
                "function_id": image.get("function_id"),
                "interface_id": image.get("interface_id"),
            }
        for sha256 in list(state.image_ids)[:-REMEMBERED_IMAGES]:
            del state.image_ids[sha256]

    # -- reports -------------------------------------------------------------------------

    def _progress(self, uuid: str, state: str) -> None:
        """Say how far the program got. Only the end must reach the API: an unreachable
        API here is logged and the work goes on."""
        try:
            self._put(uuid, {"state": state})
        except _Unreachable as error:
            LOG.warning("program %s: %s not reported (%s)", uuid, state, error)

    def _finish(
        self,
        state: AgentState,
        uuid: str,
        outcome: str,
        reason: str | None,
        *,
        loaded: LoadedImage | None = None,
        restored: bool | None = None,
        changed: bool | None = None,
    ) -> bool:
        """Record the final report in the cache, then deliver it."""
        report: dict[str, Any] = {"state": outcome}
        if reason is not None:
            report["reason"] = reason
        if outcome == "done":
            report["loaded"] = {
                "function_id": loaded.function_id if loaded else None,
                "interface_id": loaded.interface_id if loaded else None,
            }
            LOG.info("program %s done%s", uuid, f" ({reason})" if reason else "")
        else:
            report["restored"] = restored
            LOG.error("program %s failed: %s (restored: %s)", uuid, reason, restored)
        self.finish(state, uuid, {"report": report, "acknowledged": False})
        return (outcome == "done" and reason is None) if changed is None else changed

    def _put(self, uuid: str, body: dict[str, Any]) -> None:
        """Report a step's progress (not retried: only the end must arrive, and the base
        sends that). _Unreachable when the API did not take it, _Gone when it says the
        program no longer concerns this agent."""
        url = f"{self.endpoint}/agent/v1/hosts/{self.hostname}/programs/{uuid}"
        try:
            response = self.session.put(
                url,
                json=body,
                raise_exc=False,
                timeout=self.timeout,
                authenticated=self.session.auth is not None,
            )
        except transport_errors() as error:
            raise _Unreachable(f"API unreachable: {error}") from None
        status = response.status_code
        if status in (200, 204):
            return
        if status == 404:
            raise _Gone("the API does not know this program on this host (404)")
        if status == 409:
            raise _Gone(f"the program already ended ({response.text[:200]})")
        if status >= 500 or status in (401, 403, 408, 429):
            raise _Unreachable(f"{status} {response.text[:200]}")
        # A report the API rejects (400) will not be accepted later either.
        LOG.error("program %s: the API rejected %s: %s %s", uuid, body, status, response.text)

    def _poll_status(self, problem: str | None, level: int = logging.WARNING) -> None:
        if problem != self._poll_problem:
            if problem is not None:
                LOG.log(level, "%s", problem)
            elif self._poll_problem is not None:
                LOG.info("desired state reachable again")
        self._poll_problem = problem


def _programmable(target: _Target, image: Mapping[str, Any] | None) -> Programmable:
    """The target's driver, which must be able to load ``image``'s format there."""
    driver = target.driver
    formats = _formats(target.deployable)
    if not isinstance(driver, Programmable) or not formats:
        raise _Failure(
            f"driver {driver.name} cannot program {target.deployable.name}", touched=False
        )
    if image is not None and image.get("format") not in formats:
        raise _Failure(
            f"{target.deployable.name} loads {', '.join(formats)}, not {image.get('format')}",
            touched=False,
        )
    return driver


def _formats(deployable: Deployable) -> list[str]:
    for key, value in deployable.extra_attributes:
        if key == PROGRAM_FORMATS:
            return [f.strip() for f in value.split(",") if f.strip()]
    return []


def _image_file(path: str, image: Mapping[str, Any]) -> ImageFile:
    return ImageFile(
        path=path,
        uuid=image["uuid"],
        sha256=image["sha256"],
        format=image.get("format") or "",
        function_id=image.get("function_id"),
        interface_id=image.get("interface_id"),
    )


def _same(a: str, b: str) -> bool:
    """Ids compare as trait suffixes: a GUID with or without dashes, in any case."""
    return trait_suffix(a) == trait_suffix(b)


def _mismatch(loaded: LoadedImage | None, image: Mapping[str, Any]) -> str | None:
    """Why what the device holds is not ``image``; None when it is (as far as known)."""
    if loaded is None:
        return "the device reports no image loaded"
    if loaded.image_uuid is not None and loaded.image_uuid != image.get("uuid"):
        return f"the device holds image {loaded.image_uuid}, not {image.get('uuid')}"
    function_id = image.get("function_id")
    if function_id and not (loaded.function_id and _same(loaded.function_id, function_id)):
        return f"the device reports function {loaded.function_id}, the image has {function_id}"
    interface_id = image.get("interface_id")
    if interface_id and loaded.interface_id and not _same(loaded.interface_id, interface_id):
        return f"the device reports interface {loaded.interface_id}, the image has {interface_id}"
    return None


def _matches(loaded: LoadedImage | None, image: Mapping[str, Any]) -> bool:
    """The image is known to be loaded already: by its uuid, or by its function id."""
    if loaded is None or (loaded.image_uuid is None and not image.get("function_id")):
        return False
    return _mismatch(loaded, image) is None
