from crashscope.hostlist import MAX_HOSTS, compress, estimate_size, expand, expand_hosts, expand_ints


def test_expand_basic_padding_and_product():
    assert expand("node[001-004,007]") == (["node001", "node002", "node003", "node004", "node007"], True)
    assert expand("n[8-10]")[0] == ["n8", "n9", "n10"]
    assert expand("rack[1-2]-n[1-2]")[0] == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert expand("gpu[001-002],login1")[0] == ["gpu001", "gpu002", "login1"]
    assert expand("node005") == (["node005"], True)


def test_sentinels_are_empty():
    for s in ("", "(null)", "None assigned", "None", None):
        assert expand(s) == ([], True)


def test_errors_return_input_and_flag():
    assert expand("node[1-") == (["node[1-"], False)
    assert expand("node[3-1]") == (["node[3-1]"], False)
    assert expand("node[a-b]") == (["node[a-b]"], False)
    assert expand_hosts("x]]") == ["x]]"]


def test_cap_is_checked_before_expanding():
    assert estimate_size("n[1-1000000000]") == 1_000_000_000
    assert expand("n[1-1000000000]") == (["n[1-1000000000]"], False)
    assert expand("a[1-300]b[1-300]", limit=MAX_HOSTS) == (["a[1-300]b[1-300]"], False)
    assert len(expand("n[1-100]", limit=100)[0]) == 100


def test_compress_roundtrip_and_never_raises():
    assert compress(["node001", "node002", "node003", "node007"]) == "node[001-003,007]"
    assert compress([]) == ""
    hosts = expand("node[001-064],login[1-2]")[0]
    assert sorted(expand(compress(hosts))[0]) == sorted(hosts)
    assert isinstance(compress(["a[", "b]"]), str)


def test_expand_ints():
    assert expand_ints("0,2,5-6") == ([0, 2, 5, 6], True)
    assert expand_ints("[0-3]") == ([0, 1, 2, 3], True)
    assert expand_ints("3-1") == ([], False)
    assert expand_ints("x") == ([], False)
    assert expand_ints("0-99999999") == ([], False)


def test_compress_ints_is_the_inverse_of_expand_ints() -> None:
    from crashscope.hostlist import compress_ints, expand_ints

    assert compress_ints([8, 0, 1, 2, 5, 7, 2]) == "0-2,5,7-8"
    assert compress_ints([True, None, "3", 4]) == "4"  # only real ints
    assert compress_ints([]) == ""
    ints, _ok = expand_ints("0-2,5,7-8")
    assert compress_ints(ints) == "0-2,5,7-8"
