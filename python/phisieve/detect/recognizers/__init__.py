"""The recognizers ``detect`` combines: Rust rules, lists and the built-in dictionaries
(:mod:`~phisieve.detect.recognizers.dictionaries`), Presidio
(:mod:`~phisieve.detect.recognizers.presidio`), Stanza
(:mod:`~phisieve.detect.recognizers.stanza`) and a trained token classifier
(:mod:`~phisieve.detect.recognizers.model`)."""
