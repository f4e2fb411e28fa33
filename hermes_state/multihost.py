"""PostgreSQL URLs that list several servers (libpq's multi-host form), read into one shape.

libpq, and the failover managers that print URLs for it (Patroni, pg_auto_failover), list the
servers of a cluster in the authority: ``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=
read-write``. SQLAlchemy's URL parser cannot read a comma there; it documents the servers as
repeated ``host`` query parameters instead (``?host=h1:5432&host=h2:5432``), as do libpq's
keyword lists (``?host=h1,h2&port=5432,5433``). :func:`parse` reads the authority form,
:func:`normalize` turns every spelling into one (the repeated ``host=HOST:PORT`` form, each
with its port, which both psycopg and asyncpg take; comma lists where a host is an IPv6
address), and :func:`render` writes a URL back in libpq's form, for messages. Query
parameters such as ``target_session_attrs`` pass through to the driver untouched.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

from sqlalchemy.engine import URL

from .errors import InvalidInputError

__all__ = ["DEFAULT_PORT", "hosts", "normalize", "parse", "render"]

DEFAULT_PORT: Final = 5432
#: scheme://[user[:password]@]host[:port],host[:port]...[/database][?query]
_AUTHORITY_LIST: Final = re.compile(
    r"^(?P<scheme>[A-Za-z][\w+.-]*)://"
    r"(?:(?P<user>[^:@/]*)(?::(?P<password>[^@]*))?@)?"
    r"(?P<hosts>[^/?@]*,[^/?@]*)"
    r"(?P<database>/[^?]*)?"
    r"(?:\?(?P<query>.*))?$",
    re.S,
)
_WORKS: Final = (
    "postgresql://USER@HOST1:5432,HOST2:5432/DB?target_session_attrs=read-write "
    "(or ?host=HOST1:5432&host=HOST2:5432)"
)


#: What a URL of one server looks like, for the databases that take no list.
_ONE_SERVER: Final = {
    "mysql": "mysql://USER@PRIMARY:3306/DB",
    "mariadb": "mariadb://USER@PRIMARY:3306/DB",
    "sqlite": "sqlite:////path/state.db",
}


def _refuse(message: str, works: str = _WORKS) -> InvalidInputError:
    return InvalidInputError(f"{message}; a URL that works: {works}")


def _split_host(token: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` -> (host, port)."""
    token = urllib.parse.unquote(token.strip())
    if not token:
        raise _refuse("an empty host in a list of hosts")
    if token.startswith("["):
        address, _, rest = token[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    elif token.count(":") == 1:
        address, _, port_text = token.partition(":")
    else:  # a bare name, a socket folder, or an unbracketed IPv6 address (keyword form)
        address, port_text = token, ""
    return address, _port(port_text)


def _port(text: str) -> int:
    text = text.strip()
    if not text:
        return DEFAULT_PORT
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _refuse(f"{text!r} is not a port number")
    return int(text)


def parse(text: str) -> URL | None:
    """The URL of libpq's comma-separated authority; None when ``text`` lists no hosts so."""
    found = _AUTHORITY_LIST.match(text.strip())
    if found is None:
        return None
    query: dict[str, list[str]] = {}
    for key, value in urllib.parse.parse_qsl(found["query"] or "", keep_blank_values=True):
        query.setdefault(key, []).append(value)
    if "host" in query or "port" in query:
        raise _refuse("hosts are listed both before the database name and in ?host=/?port=")
    servers = [_split_host(token) for token in found["hosts"].split(",")]
    user, password = found["user"], found["password"]
    database = urllib.parse.unquote((found["database"] or "").lstrip("/")) or None
    return URL.create(
        found["scheme"],
        username=urllib.parse.unquote(user) if user else None,
        password=urllib.parse.unquote(password) if password is not None else None,
        database=database,
        query={
            **{
                key: values[0] if len(values) == 1 else tuple(values)
                for key, values in query.items()
            },
            **_host_query(servers),
        },
    )


def _host_query(servers: list[tuple[str, int]]) -> dict[str, str | tuple[str, ...]]:
    if any(":" in host for host, _port in servers):  # IPv6: SQLAlchemy splits host:port on ':'
        return {
            "host": ",".join(host for host, _port in servers),
            "port": ",".join(str(port) for _host, port in servers),
        }
    return {"host": tuple(f"{host}:{port}" for host, port in servers)}


def hosts(url: URL) -> list[tuple[str, int]] | None:
    """The servers a URL lists in its query (two or more), in order; None for one server."""
    raw_hosts = url.query.get("host")
    if raw_hosts is None:
        return None
    tokens = [raw_hosts] if isinstance(raw_hosts, str) else list(raw_hosts)
    if len(tokens) == 1:
        tokens = tokens[0].split(",")
    if len(tokens) < 2:
        return None
    raw_ports = url.query.get("port")
    if raw_ports is None:
        return [_split_host(token) for token in tokens]
    ports = (raw_ports if isinstance(raw_ports, str) else ",".join(raw_ports)).split(",")
    if any(":" in token and not token.count(":") > 1 for token in tokens):
        raise _refuse("hosts carry ports both in ?host=HOST:PORT and in ?port=")
    if len(ports) == 1:
        ports = ports * len(tokens)
    if len(ports) != len(tokens):
        raise _refuse(f"{len(tokens)} hosts but {len(ports)} ports in ?host= and ?port=")
    pairs = zip(tokens, ports, strict=True)
    return [(urllib.parse.unquote(token), _port(port)) for token, port in pairs]


def normalize(url: URL) -> URL:
    """``url`` with its list of servers in the one form the engines take (see the module
    docstring); a URL of one server is returned as it is. Several servers are a PostgreSQL
    feature: any other database's URL that lists them is refused."""
    servers = hosts(url)
    if servers is None:
        return url
    if url.get_backend_name() != "postgresql":
        backend = url.get_backend_name()
        raise _refuse(
            f"a {backend} URL names one server, not a list (several hosts are libpq's, for "
            "PostgreSQL); give the current primary, or a proxy that follows it",
            _ONE_SERVER.get(backend, _WORKS),
        )
    if url.host or url.port:
        raise _refuse("hosts are listed both before the database name and in ?host=")
    rest = {key: value for key, value in url.query.items() if key not in ("host", "port")}
    return url.set(query={**rest, **_host_query(servers)})


def render(url: URL, *, hide_password: bool = True) -> str:
    """A URL listing several servers, written as libpq writes it (hosts in the authority,
    password masked unless asked); any other URL as SQLAlchemy writes it."""
    servers = hosts(url)
    if servers is None:
        return url.render_as_string(hide_password=hide_password)
    authority = ",".join(
        f"[{host}]:{port}" if ":" in host else f"{urllib.parse.quote(host, safe='')}:{port}"
        for host, port in servers
    )
    user = ""
    if url.username is not None:
        user = urllib.parse.quote(url.username, safe="")
        if url.password is not None:
            shown = "***" if hide_password else urllib.parse.quote(str(url.password), safe="")
            user += f":{shown}"
        user += "@"
    database = f"/{urllib.parse.quote(url.database)}" if url.database else "/"
    rest = [
        (key, value)
        for key, values in url.query.items()
        if key not in ("host", "port")
        for value in ((values,) if isinstance(values, str) else values)
    ]
    query = f"?{urllib.parse.urlencode(rest)}" if rest else ""
    return f"{url.drivername}://{user}{authority}{database}{query}"
