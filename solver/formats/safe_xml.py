"""Strict XML loading (NCCL topology XML, GraphML): :func:`parse_xml` through ``defusedxml``, with
the size limit and error messages of :mod:`.safe` (entity declarations, external entities and DTDs
refused; malformed XML named with its line)."""

from __future__ import annotations

from ..errors import InvalidArgumentError
from .safe import MAX_JSON_BYTES, _fail, _size_check

__all__ = ["parse_xml", "check_xml"]


def _xml_error(exc: Exception, what: str, field: str, kind: str = "XML") -> InvalidArgumentError:
    import defusedxml

    if isinstance(exc, defusedxml.EntitiesForbidden):
        return _fail(f"{what}: XML entity declarations are not accepted (entity {exc.name!r})", field)
    if isinstance(exc, defusedxml.ExternalReferenceForbidden):
        return _fail(f"{what}: XML external references are not accepted ({exc.sysid or exc.pubid!r})", field)
    if isinstance(exc, defusedxml.DTDForbidden):
        return _fail(f"{what}: XML DTDs are not accepted", field)
    if isinstance(exc, defusedxml.DefusedXmlException):
        return _fail(f"{what}: XML refused ({type(exc).__name__})", field)
    line, col = getattr(exc, "position", (0, 0))
    msg = str(exc).split(":")[0]
    return _fail(f"{what} line {line}: malformed {kind} ({msg}, column {col + 1})", field)


def parse_xml(text: str | bytes, what: str, field: str = "", *, max_bytes: int = MAX_JSON_BYTES, kind: str = "XML"):
    """``defusedxml.ElementTree.fromstring(text)``: the root element.

    Entity declarations (billion laughs, quadratic blowup) and external entities / DTDs
    are refused, as is malformed XML (with its line).
    """
    import xml.etree.ElementTree as ET

    import defusedxml
    import defusedxml.ElementTree as DET

    _size_check(text, what, field, max_bytes, "XML")
    try:
        return DET.fromstring(text, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except (ET.ParseError, defusedxml.DefusedXmlException) as exc:
        raise _xml_error(exc, what, field, kind) from None


def check_xml(text: str | bytes, what: str, field: str = "", *, max_bytes: int = MAX_JSON_BYTES,
              kind: str = "XML") -> None:
    """Refuse XML that :func:`parse_xml` refuses, before a third-party reader (networkx's
    GraphML reader) parses it with the standard library."""
    parse_xml(text, what, field, max_bytes=max_bytes, kind=kind)
