"""Canonical URLs and dedup keys."""

import pytest

from tools.base import InvalidInput
from tools.urls import canonical_url, dedup_key, host_of


@pytest.mark.parametrize("raw, clean", [
    ("HTTPS://WWW.Example.COM/Path?a=1#frag", "https://www.example.com/Path?a=1"),
    ("http://example.com:80/x", "http://example.com/x"),
    ("https://example.com:443", "https://example.com/"),
    ("https://example.com:8443/x", "https://example.com:8443/x"),
    ("https://user:secret@example.com/x", "https://example.com/x"),
    ("https://example.com/a/./b/../c/", "https://example.com/a/c/"),
    ("https://example.com/p?utm_source=x&utm_MEDIUM=y&id=7&fbclid=z&gclid=q&mc_cid=1&mc_eid=2&ref=hn",
     "https://example.com/p?id=7"),
    ("https://example.com/p?q=a%2Fb+c&page=2", "https://example.com/p?q=a%2Fb+c&page=2"),
    ("https://example.com/%7euser", "https://example.com/%7Euser"),
    ("http://[2001:DB8::1]:80/x", "http://[2001:db8::1]/x"),
    ("https://example.com./x", "https://example.com/x"),
])
def test_canonical_url(raw, clean):
    assert canonical_url(raw) == clean


def test_canonical_url_is_idempotent():
    u = "https://Example.com/a/../b?utm_campaign=x&b=2&a=1#top"
    assert canonical_url(canonical_url(u)) == canonical_url(u) == "https://example.com/b?b=2&a=1"


def test_dedup_key_ignores_scheme_www_slash_and_param_order():
    a = dedup_key("http://www.example.com/story/?b=2&a=1&utm_source=rss")
    b = dedup_key("https://example.com/story?a=1&b=2#comments")
    assert a == b == "example.com/story?a=1&b=2"
    assert dedup_key("https://example.com/story") != dedup_key("https://example.com/other")


@pytest.mark.parametrize("bad", ["", "example.com/x", "/relative/path", "https://", "http://host:notaport/"])
def test_invalid_urls_raise_invalid_input(bad):
    with pytest.raises(InvalidInput):
        canonical_url(bad)


def test_host_of():
    assert host_of("https://Sub.Example.org:8080/x") == "sub.example.org"
