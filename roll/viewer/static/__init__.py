"""The report's page template, stylesheet and script (inlined into every report; read with
importlib.resources, so they ship inside the installed package)."""
