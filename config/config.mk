# config module: objects and tests (filled in as the module grows).
