"""Read a service's signals from Prometheus (its HTTP API, instant queries) with aiohttp.

"No data" (a query that returns no series) is kept apart from zero (a series whose value is 0), and a
Prometheus that does not answer (connection refused, timeout, an HTTP or PromQL error) is a third case: the
decision holds replicas in both of the first and the third, and says which.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp

from pooling_operator.autoscaling.decide import Signals, signals_from
from pooling_operator.vllm.metrics import Queries

log = logging.getLogger(__name__)


class QueryFailed(Exception):
    """Prometheus did not answer a query usefully."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how to query: base URL, optional bearer token and CA bundle (PEM), timeout in seconds."""

    url: str
    token: str | None = None
    ca_pem: str | None = None
    timeout: float = 5.0


class PrometheusReader:
    """One HTTP session per endpoint, reused across reads."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            context: ssl.SSLContext | bool = True
            if self.endpoint.ca_pem:
                context = ssl.create_default_context(cadata=self.endpoint.ca_pem)
            headers = {"Authorization": f"Bearer {self.endpoint.token}"} if self.endpoint.token else {}
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.endpoint.timeout),
                connector=aiohttp.TCPConnector(ssl=context, limit=16),
            )
        return self._session

    async def query(self, promql: str) -> float | None:
        """An instant query's value: None when no series came back, NaN kept as NaN. A query must return at
        most one series (every query of the table aggregates)."""
        result = await self._result(promql)
        if not result:
            return None
        return float(result[0]["value"][1])

    async def total(self, promql: str) -> tuple[float, int]:
        """A user's query (a service's wake query): the sum over the series it returns (0 for none, NaN as 0), and
        how many it returned."""
        values = [float(r["value"][1]) for r in await self._result(promql)]
        return sum(v for v in values if v == v), len(values)

    async def _result(self, promql: str) -> list[Any]:
        url = self.endpoint.url.rstrip("/") + "/api/v1/query"
        try:
            async with self._client().get(url, params={"query": promql}) as response:
                text = await response.text()
                if response.status != 200:
                    raise QueryFailed(f"HTTP {response.status} from {url}: {text[:200]}")
                body: Any = await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            # Which of DNS, refusal or timeout comes first varies from one period to the next under load: the
            # condition's message says the same thing each time (status is written only when it changes),
            # the log says which.
            log.debug("Prometheus query to %s failed: %s: %s", url, type(exc).__name__, exc)
            raise QueryFailed(f"no connection to {url} within {self.endpoint.timeout:g}s") from exc
        except (aiohttp.ClientError, ValueError) as exc:
            raise QueryFailed(f"{type(exc).__name__} from {url}: {exc}") from exc
        if body.get("status") != "success":
            raise QueryFailed(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
        data = body.get("data", {})
        if data.get("resultType") not in (None, "vector"):
            raise QueryFailed(f"the query returns a {data.get('resultType')}, not an instant vector")
        return list(data.get("result") or [])

    async def read(self, queries: Queries) -> Signals:
        """Every signal of one service, queried concurrently."""
        named = queries.named()
        try:
            values = dict(zip(named, await asyncio.gather(*(self.query(q) for q in named.values())), strict=True))
        except QueryFailed as exc:
            return Signals(unreachable=str(exc), queries=named)

        return signals_from(values, named)
