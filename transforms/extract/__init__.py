"""The extract step: the main text of HTML records (issue 45).

``transforms.extract.config.ExtractConfig`` is the config section (imported by the run config: no HTML library
is loaded with it); ``transforms.extract.core.extract`` the pure core; ``transforms.extract.step.ExtractStep``
the step. Import them from their modules."""
