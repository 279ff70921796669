"""What the fleet overview (``/``) shows, as read from and written back to the URL query string.

The hostname search, label filters and table sort are the fleet list's own
(:class:`app.fleet.pages.FleetFilters`, lenient); the overview adds the health state, the GPU
model, the overlay, the view and "problems only", whose values are checked: an unknown one is a
400 naming the parameter. A label filter without ``key=`` is a 400 naming ``label`` here too,
as ``GET /api/v1/nodes`` answers 422 for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from app.errors import BadRequest
from app.health.rules import State
from app.whole_numbers import parse_whole

if TYPE_CHECKING:
    from app.fleet.pages import FleetFilters

#: Overlay name → title, in the order of the switch; ``health`` is the default.
OVERLAYS: dict[str, str] = {
    "health": "Health",
    "util": "GPU utilization",
    "mem": "GPU memory used",
    "temp": "Temperature",
    "power": "Power (% of limit)",
}
VIEWS: dict[str, str] = {"tiles": "Tiles", "table": "Table"}
#: Grid grouping name → title; ``pod`` (the IB pod, else the rack) is the default. On NVL72
#: systems one bad tray takes a whole NVLink domain (a rack) out of large jobs.
GROUPINGS: dict[str, str] = {
    "pod": "IB pod",
    "rack": "Rack",
    "nvlink_domain": "NVLink domain",
}
STATES: tuple[str, ...] = tuple(s.value for s in State)
#: Service filter value → title: in service (and not in maintenance), out of service (the
#: lifecycle: quarantined, remediating, validating, RMA), in a maintenance window now.
SERVICES: dict[str, str] = {
    "in": "In service",
    "out": "Out of service",
    "maintenance": "In maintenance",
}
MODEL_MAX_CHARS = 256  # the gpu.name column
#: Rows per page of the table view: a 5,000-node table would be 5 MB of HTML every 5 s.
PAGE_ROWS = 500
MAX_PAGE = 1_000_000


def _page(value: str | None) -> int:
    text = (value or "").strip()
    if not text:
        return 1
    page = parse_whole(text, low=1, high=MAX_PAGE)
    if page is None:
        raise BadRequest(f"page: expected a whole number from 1 to {MAX_PAGE:,}, got {text[:40]!r}")
    return page


def _choice(name: str, value: str | None, allowed: tuple[str, ...] | list[str]) -> str | None:
    value = (value or "").strip()
    if not value:
        return None
    if value not in allowed:
        raise BadRequest(f"{name}: expected one of {', '.join(allowed)}, got {value[:40]!r}")
    return value


@dataclass(frozen=True)
class OverviewFilters:
    """The overview's URL state: ``base`` (q, label, sort) plus the fields below; empty/None
    means "not set"."""

    base: FleetFilters
    state: str | None = None
    model: str | None = None
    overlay: str = "health"
    view: str = "tiles"
    problems: bool = False
    group: str = "pod"
    #: The table view's page (1-based, :data:`PAGE_ROWS` rows each).
    page: int = 1
    #: Every tile, even in a grid big enough to collapse its all-healthy groups.
    expand: bool = False
    #: A key of :data:`SERVICES`: only the nodes in that service state.
    service: str | None = None
    _queries: dict[tuple[Any, ...], str] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @classmethod
    def parse(
        cls,
        base: FleetFilters,
        *,
        state: str | None = None,
        model: str | None = None,
        overlay: str | None = None,
        view: str | None = None,
        problems: str | None = None,
        group: str | None = None,
        page: str | None = None,
        expand: str | None = None,
        service: str | None = None,
    ) -> OverviewFilters:
        """Check the overview's own parameters.

        Raises:
            BadRequest: ``state``, ``overlay``, ``view``, ``problems``, ``group``, ``expand``
                or ``service`` has a value outside its list (the message names the
                parameter); ``page`` is not a whole number from 1 to 1,000,000; ``model``
                over 256 characters; a ``label`` entry without ``key=`` (as the API's 422 on
                ``query.label``).
        """
        if base.invalid:
            raise BadRequest(f"label: expected key=value, got {base.invalid[0][:80]!r}")
        model = (model or "").strip() or None
        if model is not None and len(model) > MODEL_MAX_CHARS:
            raise BadRequest(f"model: longer than {MODEL_MAX_CHARS} characters")
        return cls(
            base=base,
            state=_choice("state", state, STATES),
            model=model,
            overlay=_choice("overlay", overlay, list(OVERLAYS)) or "health",
            view=_choice("view", view, list(VIEWS)) or "tiles",
            problems=_choice("problems", problems, ("0", "1")) == "1",
            group=_choice("group", group, list(GROUPINGS)) or "pod",
            page=_page(page),
            expand=_choice("expand", expand, ("0", "1")) == "1",
            service=_choice("service", service, list(SERVICES)),
        )

    # The fleet table template reads these names.
    @property
    def q(self) -> str:
        """The hostname substring searched for ("" for none)."""
        return self.base.q

    @property
    def labels(self) -> dict[str, str]:
        """Label filters, key → exact value."""
        return self.base.labels

    @property
    def sort(self) -> str:
        """The table view's order (``hostname`` or ``health``)."""
        return self.base.sort

    @property
    def invalid(self) -> tuple[str, ...]:
        """Label filter entries without ``=``, reported back on the page."""
        return self.base.invalid

    @property
    def narrowed(self) -> bool:
        """Whether any filter narrows the nodes shown (overlay and view do not)."""
        return bool(
            self.q or self.labels or self.state or self.model or self.problems or self.service
        )

    def query(self, **changes: Any) -> str:
        """The URL query string (``?q=…&label=k=v&sort=…&state=…``, the fleet list's
        parameters first) with ``changes`` applied: ``label_add=(k, v)``, ``label_drop=k``,
        and ``state``, ``model``, ``overlay``, ``view``, ``problems``, ``group``, ``expand``,
        ``service``, ``page`` replaced (None clears). Any other change goes back to the first
        page of the table. Defaults are left out, so the plain page is ``""``. Memoized per
        filters: the table asks for the same label links on every row (20,000 calls at 1,000
        nodes)."""
        key = tuple(sorted(changes.items()))
        found = self._queries.get(key)
        if found is None:
            found = self._queries[key] = self._query(**changes)
        return found

    def _query(self, **changes: Any) -> str:
        labels = dict(self.labels)
        if "label_drop" in changes:
            labels.pop(changes["label_drop"], None)
        if "label_add" in changes:
            key, value = changes["label_add"]
            labels[key] = value
        params: list[tuple[str, str]] = [("q", self.q)] if self.q else []
        params += [("label", f"{k}={v}") for k, v in labels.items()]
        if self.sort != "hostname":
            params.append(("sort", self.sort))
        values = {
            "state": self.state,
            "model": self.model,
            "overlay": self.overlay,
            "view": self.view,
            "problems": self.problems,
            "group": self.group,
            "expand": self.expand,
            "service": self.service,
        }
        values.update({k: v for k, v in changes.items() if k in values})
        if values["state"]:
            params.append(("state", str(values["state"])))
        if values["model"]:
            params.append(("model", str(values["model"])))
        if values["overlay"] and values["overlay"] != "health":
            params.append(("overlay", str(values["overlay"])))
        if values["view"] and values["view"] != "tiles":
            params.append(("view", str(values["view"])))
        if values["problems"]:
            params.append(("problems", "1"))
        if values["group"] and values["group"] != "pod":
            params.append(("group", str(values["group"])))
        if values["expand"]:
            params.append(("expand", "1"))
        if values["service"]:
            params.append(("service", str(values["service"])))
        page = changes.get("page", None if changes else self.page)
        if page and page != 1:
            params.append(("page", str(page)))
        return "?" + urlencode(params) if params else ""
