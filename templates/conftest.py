"""pytest settings of the tests dbgen generated: the `compile` marker they use, registered so that
`pytest --strict-markers` collects them in any project (select with -m 'not compile' where
torch.compile is unavailable)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "compile: uses torch.compile (deselect with -m 'not compile' where compile is unavailable)"
    )
