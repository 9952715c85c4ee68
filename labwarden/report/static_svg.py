"""A flame graph the report can draw without script: inferno's SVG with its script, its event
handlers and its interactive controls (search, reset zoom, the hover details line) taken out.

inferno writes every frame as a static <rect> and <text> (the text already cut to fit the
default 1200 px width), so nothing is lost to the eye; its script only re-fits the graph to its
frame, zooms and searches. In the report the result is an <img> (an image never runs script:
a browser draws it when the page loads, with no time budget), each frame's name and share still
in its <title> and in the tables beside it."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

SVG = "http://www.w3.org/2000/svg"
XLINK = "http://www.w3.org/1999/xlink"
FG = "http://github.com/jonhoo/inferno"
_CONTROLS = {"details", "unzoom", "search", "matched"}
"""inferno's interactive text elements: without its script they would show dead buttons."""


class NotAnSvg(ValueError):
    """The file is not an SVG document (it is not embedded)."""


def static_svg(data: bytes) -> str:
    """The SVG document `data` with no <script>, no on* attribute, no inferno control and no
    reference outside itself: an XML document that draws the same with scripting off."""
    for prefix, uri in (("", SVG), ("xlink", XLINK), ("fg", FG)):
        ET.register_namespace(prefix, uri)
    try:
        root = ET.fromstring(data)  # expat: no external entity or DTD is fetched
    except ET.ParseError as exc:
        raise NotAnSvg(f"not well-formed: {exc}") from None
    if root.tag != f"{{{SVG}}}svg":
        raise NotAnSvg(f"its root is {root.tag!r}, not an svg element")
    for parent in [root, *root.iter()]:
        for child in list(parent):
            local = child.tag.rpartition("}")[2] if isinstance(child.tag, str) else ""
            if local in ("script", "foreignObject") or child.get("id") in _CONTROLS:
                parent.remove(child)
    for el in root.iter():
        for name in [n for n in el.attrib if n.rpartition("}")[2].lower().startswith("on")]:
            del el.attrib[name]
        for name in [n for n in el.attrib if n.rpartition("}")[2] == "href"]:
            if not el.attrib[name].startswith("#"):  # only references inside the document
                del el.attrib[name]
    buf = io.BytesIO()
    ET.ElementTree(root).write(buf, encoding="utf-8", xml_declaration=True)
    return buf.getvalue().decode()
