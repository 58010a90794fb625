"""``record.schema.json``'s ``$defs/harness``, what ``rocmlab.harness.run_harness`` writes, as a
validator: the schema's own tests and the end-to-end runs that have a real harness record."""

from rocmlab.schemas import schema


def harness_errors(record: dict) -> list[str]:
    """What in ``record`` the schema's ``$defs/harness`` does not describe (empty when it validates)."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    registry = Registry().with_resource("record.schema.json", Resource.from_contents(schema("record")))
    validator = Draft202012Validator({"$ref": "record.schema.json#/$defs/harness"}, registry=registry)
    return [error.message for error in validator.iter_errors(record)]
