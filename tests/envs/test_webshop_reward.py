"""WebShop reward: the paper's definition on hand-built products and goals."""
from __future__ import annotations

import pytest

from roll.envs.webshop.reward import compute_reward, fuzzy_match, type_reward, type_words

SHOES = {
    "asin": "B0SHOE0001",
    "title": "Kalove Lightweight Running Shoes, Non Slip",
    "query": "running shoes",
    "product_category": "Clothing, Shoes & Jewelry › Shoes › Athletic › Running",
    "description": "Made for road runs. Key features: lightweight, non slip and arch support.",
    "bullet_points": ["LIGHTWEIGHT: built to last", "NON SLIP: grips well", "ARCH SUPPORT: comfy"],
    "attributes": ["lightweight", "non slip", "arch support"],
    "options": {"color": ["black", "navy"], "size": ["8", "9"]},
    "pricing": [49.99],
    "price": 49.99,
}
DRILL = {
    "asin": "B0DRILL001",
    "title": "Torvi Cordless Drill - Brushless Motor",
    "query": "cordless drill",
    "product_category": "Tools & Home Improvement › Power & Hand Tools › Power Tools › Drills",
    "description": "Made for home repairs. Key features: brushless motor.",
    "bullet_points": ["BRUSHLESS MOTOR: strong"],
    "attributes": ["brushless motor", "lightweight", "non slip"],
    "options": {"color": ["black"], "size": ["9"]},
    "pricing": [29.99],
    "price": 29.99,
}


def goal(**over):
    g = {
        "query": "running shoes",
        "product_category": SHOES["product_category"],
        "type_words": type_words("running shoes"),
        "attributes": ["lightweight", "non slip"],
        "options": {"color": "black", "size": "9"},
        "price_upper": 60.0,
    }
    g.update(over)
    return g


def test_exact_match_scores_one():
    r = compute_reward(SHOES, goal(), {"color": "black", "size": "9"})
    assert r.score == 1.0 and r.r_type == 1.0 and r.r_att == 1.0 and r.r_option == 1.0 and r.r_price is True


def test_wrong_option_costs_its_share():
    # 2 attributes + 2 options + price = 5 parts; one wrong option loses exactly 1/5.
    r = compute_reward(SHOES, goal(), {"color": "navy", "size": "9"})
    assert r.score == pytest.approx(4 / 5)
    assert r.r_option == pytest.approx(0.5)
    # No option chosen at all loses both option parts.
    assert compute_reward(SHOES, goal(), {}).score == pytest.approx(3 / 5)


def test_size_is_matched_exactly_and_other_options_fuzzily():
    # "size" compares exactly (as the original): "9" does not match "19".
    assert compute_reward(SHOES, goal(options={"size": "19"}), {"size": "9"}).r_option == 0.0
    # Other options are fuzzy: "Black" with different case/punctuation still matches.
    assert compute_reward(SHOES, goal(options={"color": "black!"}), {"color": "Black"}).r_option == 1.0


def test_price_over_the_limit_costs_its_share():
    r = compute_reward(SHOES, goal(price_upper=40.0), {"color": "black", "size": "9"})
    assert r.r_price is False
    assert r.score == pytest.approx(4 / 5)
    # No limit (price_upper <= 0): the price term leaves the average.
    r = compute_reward(SHOES, goal(price_upper=0), {"color": "black", "size": "9"})
    assert r.r_price is None and r.score == 1.0


def test_wrong_product_type_scores_zero():
    # Same attributes, option values and a lower price, but a drill is not a running shoe.
    r = compute_reward(DRILL, goal(), {"color": "black", "size": "9"})
    assert r.r_type == 0.0 and r.score == 0.0
    assert r.r_att == 1.0  # the parts matched; the type factor zeroes them


def test_type_ladder_partial_title_overlap():
    # Category shares only the root, query differs, title shares 1 of 2 type words -> 1.0
    # (title_score 0.5 > 0.2, as the original); sharing a small fraction gives 0.5 / 0.1.
    hiking = dict(SHOES, query="hiking shoes", title="Brand Hiking Shoes",
                  product_category="Clothing, Shoes & Jewelry › Outdoor")
    r_type, query_match, category_match, title_score = type_reward(hiking, goal())
    assert (query_match, category_match, title_score, r_type) == (False, False, 0.5, 1.0)
    many = goal(type_words=["a", "b", "c", "d", "e", "f", "g", "h", "i", "shoes"])
    assert type_reward(hiking, many)[0] == 0.5  # title_score 0.1: not > 0.2, not < 0.1
    many = goal(type_words=[f"w{i}" for i in range(11)] + ["shoes"])
    assert type_reward(hiking, many)[0] == 0.1  # title_score 1/12 < 0.1


def test_fuzzy_near_miss_strings():
    # Punctuation and case do not matter; token order does not matter.
    assert fuzzy_match("water-resistant", "Water Resistant")
    assert fuzzy_match("support arch", "arch support")
    # A one-letter typo in a long phrase is still a match (token-set ratio > 85) ...
    assert fuzzy_match("memory foam insole", "memory foam insoles")
    # ... but different spellings of short words are not (ratio 75).
    assert not fuzzy_match("grey", "gray")
    r = compute_reward(SHOES, goal(attributes=["non-slip", "light weight"]), {"color": "black", "size": "9"})
    # "non-slip" fuzzy-matches "non slip"; "light weight" is a near miss (ratio 96 > 85).
    assert r.matched_attributes == ["non-slip", "light weight"]
    r = compute_reward(SHOES, goal(attributes=["waterproof"]), {"color": "black", "size": "9"})
    assert r.matched_attributes == [] and r.score == pytest.approx(3 / 4)


def test_attribute_found_in_text_counts_on_whole_words_only():
    product = dict(SHOES, attributes=[], description="A sturdy, covered design. Comes with gift box.",
                   bullet_points=[], title="Kalove Running Shoes")
    r = compute_reward(product, goal(attributes=["gift box", "red"], options={}), {})
    # "gift box" is in the description; "red" only inside "covered", which does not count.
    assert r.matched_attributes == ["gift box"]
    assert r.score == pytest.approx(2 / 3)
