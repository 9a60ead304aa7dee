"""The panel scenario (filled in with the panel)."""


def run(browser, params):
    raise NotImplementedError("panel")
