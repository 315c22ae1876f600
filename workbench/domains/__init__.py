"""Task domains: one package per family of built-in tasks (its tool specs, its simulated world and its task
generators). A domain imports `workbench.types` only; environments and task loading import the domain."""
