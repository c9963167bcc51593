"""The WebShop pages in the original's simple text mode (visible texts joined by " [SEP] ").

Each renderer returns the page text and the clickables on it, lower-cased as the original's
``get_available_actions`` reports them (clicks are matched case-insensitively). Button labels
are the original's: "Back to Search", "Next >", "< Prev", "Description", "Features",
"Reviews", "Buy Now".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

SEP = " [SEP] "
RESULTS_PER_PAGE = 10
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
VIEWED = "Viewed"


PRODUCT_REFS = ("asin", "index")


@dataclass
class Page:
    text: str
    clickables: list[str] = field(default_factory=list)
    has_search_bar: bool = False
    # results pages: each product's clickable -> its asin
    products: dict[str, str] = field(default_factory=dict)


def price_tag(pricing: Sequence[float]) -> str:
    if len(pricing) >= 2:
        return f"${pricing[0]:.2f} to ${pricing[1]:.2f}"
    return f"${pricing[0]:.2f}"


def _header(instruction: str | None) -> list[str]:
    return ["WebShop", "Instruction:", instruction] if instruction is not None else ["WebShop"]


def search_page(instruction: str | None) -> Page:
    return Page(SEP.join([*_header(instruction), "Search"]), [], has_search_bar=True)


def n_result_pages(n_results: int, per_page: int = RESULTS_PER_PAGE) -> int:
    return max(1, -(-n_results // per_page))


def results_page(instruction: str | None, products: Sequence[dict[str, Any]], page: int, total: int,
                 per_page: int = RESULTS_PER_PAGE, refs: str = "asin", viewed: Sequence[str] = ()) -> Page:
    """``refs``: how a product is named and clicked: by its id, as the original ("asin"), or by
    its position on this page, 1 to ``per_page`` ("index"). A product whose id is in ``viewed``
    carries a "Viewed" mark after its name (not clickable), as a browser shows a visited link."""
    parts = [*_header(instruction), BACK_TO_SEARCH, f"Page {page} (Total results: {total})"]
    clickables = [BACK_TO_SEARCH.lower()]
    if page > 1:
        parts.append(PREV_PAGE)
        clickables.append(PREV_PAGE.lower())
    if page < n_result_pages(total, per_page):
        parts.append(NEXT_PAGE)
        clickables.append(NEXT_PAGE.lower())
    refs_to_asin = {}
    for i, p in enumerate(products, 1):
        ref = p["asin"] if refs == "asin" else str(i)
        parts += [ref, *([VIEWED] if p["asin"] in viewed else []), p["title"], price_tag(p["pricing"])]
        clickables.append(ref.lower())
        refs_to_asin[ref.lower()] = p["asin"]
    return Page(SEP.join(parts), clickables, products=refs_to_asin)


def item_page(instruction: str | None, product: dict[str, Any]) -> Page:
    parts = [*_header(instruction), BACK_TO_SEARCH, PREV_PAGE]
    clickables = [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()]
    for name, values in product["options"].items():
        parts.append(name)
        parts += values
        clickables += [v.lower() for v in values]
    parts += [product["title"], f"Price: {price_tag(product['pricing'])}", f"Rating: {product.get('rating', 'N.A.')}",
              *SUB_PAGES, BUY_NOW]
    clickables += [s.lower() for s in SUB_PAGES] + [BUY_NOW.lower()]
    return Page(SEP.join(parts), clickables)


def sub_page(instruction: str | None, product: dict[str, Any], which: str) -> Page:
    parts = [*_header(instruction), BACK_TO_SEARCH, PREV_PAGE]
    if which == "description":
        parts.append(product["description"])
    elif which == "features":
        parts += product["bullet_points"]
    else:
        for r in product.get("reviews", []):
            parts += [str(r.get("title", "")), str(r.get("score", "")), str(r.get("body", ""))]
    return Page(SEP.join(parts), [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()])


def done_page(product: dict[str, Any], options: dict[str, str], score: float) -> Page:
    chosen = ", ".join(f"{k}: {v}" for k, v in options.items()) or "none"
    parts = ["Thank you for shopping with us!", "Purchased", product["asin"], product["title"],
             f"Options: {chosen}", "Your score (min 0.0, max 1.0)", f"{score:.2f}"]
    return Page(SEP.join(parts), [])
