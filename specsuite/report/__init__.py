"""``specsuite report``: the history as a static site (an index per device class and backend, a page per
case over commits, a page per run), with its templates and assets (uPlot, vendored) as package data."""
